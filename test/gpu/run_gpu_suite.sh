#!/bin/sh
# ctest's `lit-gpu` entry: the GPU suite (test/gpu) when libdsrt sees a CUDA device, else
# "skipped: no CUDA GPU (<reason>)" and exit 77 (the entry's SKIP_RETURN_CODE).
# usage: run_gpu_suite.sh DSRUN LIT LIT_CONFIG_DIR
dsrun=$1 lit=$2 config_dir=$3
listing=$("$dsrun" --list-devices 2>&1) || {
  echo "FAIL: dsrun --list-devices: $listing"
  exit 1
}
# The first line is the device count; the lines after it say where the libraries were found.
count_line=$(printf '%s\n' "$listing" | head -n 1)
case "$count_line" in
  "cuda devices: 0"*)
    reason=${count_line#cuda devices: 0 (}
    echo "skipped: no CUDA GPU (${reason%)})"
    exit 77 ;;
  "cuda devices: "*) echo "$listing" ;;
  *)
    echo "FAIL: unexpected answer from dsrun --list-devices: $listing"
    exit 1 ;;
esac
exec "$lit" -sv --filter "^dsc :: gpu/" "$config_dir"
