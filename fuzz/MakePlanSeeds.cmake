# The plan harness's seeds (fuzz/CMakeLists.txt): small plans of every kind the loader
# reads. Run with -DWRITER -DDSC -DMODEL -DOUT.
file(MAKE_DIRECTORY ${OUT})
execute_process(COMMAND ${WRITER} ${OUT}/sample.dsp RESULT_VARIABLE failed)
if(failed)
  message(FATAL_ERROR "write-sample-plan failed")
endif()
foreach(tp 1 2)
  set(name llama)
  if(tp GREATER 1)
    set(name llama-tp${tp})
  endif()
  execute_process(COMMAND ${DSC} compile ${MODEL} -o ${OUT}/${name}.dsp --tp ${tp}
                          --max-batch 2 --max-seq-len 16 --arch none
                  RESULT_VARIABLE failed ERROR_QUIET)
  if(failed)
    message(FATAL_ERROR "dsc compile ${MODEL} --tp ${tp} failed")
  endif()
endforeach()
