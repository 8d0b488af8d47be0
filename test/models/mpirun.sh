#!/bin/sh
# mpirun for the tests: ranks as root and more ranks than cores, with a session directory of
# its own. Open MPI creates its session tree under TMPDIR, and two mpiruns creating the
# shared one at once fail ("File exists"); a short path also keeps PMIx's socket paths
# within the 108 bytes a Unix socket allows.
dir=$(mktemp -d /tmp/dsc-mpi.XXXXXX) || exit 1
TMPDIR=$dir mpirun --allow-run-as-root --oversubscribe "$@"
status=$?
rm -rf "$dir"
exit $status
