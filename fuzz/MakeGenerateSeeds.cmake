# The whole-path harness's interface seeds (issue 46), made from the committed fixtures by
# test/tools/onnx-retype rather than committed: the two models whose bf16 attention_mask
# once made the generator write past its buffer, and their neighbours (ids, positions, a
# past key, a present value of another dtype). Each must compile and run correctly, or be
# refused with a message; fuzz-onnx-generate-inputs runs them in every build, fuzz/run.sh
# under ASan.
#   cmake -DRETYPE=... -DMODELS=test/models -DOUT=dir -P MakeGenerateSeeds.cmake
file(MAKE_DIRECTORY ${OUT})
set(cases
  "llama3-mask-bf16 llama3-dynamo23 attention_mask bfloat16"
  "falcon-mask-bf16 falcon-dynamo attention_mask bfloat16"
  "llama3-ids-bf16 llama3-dynamo23 input_ids bfloat16"
  "llama3-positions-f16 llama3-dynamo23 position_ids float16"
  "llama3-past-key-int64 llama3-dynamo23 past_key_values.0.key int64"
  "falcon-present-value-f16 falcon-dynamo present.1.value float16")
foreach(entry ${cases})
  separate_arguments(parts UNIX_COMMAND "${entry}")
  list(GET parts 0 name)
  list(GET parts 1 fixture)
  list(GET parts 2 value)
  list(GET parts 3 type)
  execute_process(COMMAND ${RETYPE} ${MODELS}/${fixture}/model.onnx ${value} ${type}
                          -o ${OUT}/${name}.onnx
                  RESULT_VARIABLE result)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "onnx-retype failed for ${name}")
  endif()
endforeach()
