# Builds examples/generate against the installed dsrt, runs it on PLAN and checks its greedy
# tokens against transformers' (REFERENCE, a generation.json of tools/fixtures/generate_refs.py):
#   * `generate` (C API) on the first prompt alone;
#   * `generate_cpp` (dsrt.hpp) on all prompts as one left-padded batch: each row must equal
#     that prompt's tokens alone, and its streamed tokens its returned ones;
#   * errors of libdsrt reach the user with their status and dsrt_last_error();
#   * with a tokenizer in the plan, a text prompt runs (no reference: only that it works).
# Token ids are compared exactly: the reference's smallest top-1/top-2 logit margin over
# these steps (min_greedy_margin in the JSON, about 3e-3 for gpt2) is far above the fp32
# differences of two correct implementations.
include(${CMAKE_CURRENT_LIST_DIR}/Common.cmake)

file(READ ${REFERENCE} json)
string(JSON max_new GET "${json}" max_new_tokens)
string(JSON prompt_count LENGTH "${json}" prompts)

function(json_ids out_var)  # json_ids(var key path...) -> "1,2,3"
  string(JSON n LENGTH "${json}" ${ARGN})
  set(ids "")
  math(EXPR last "${n} - 1")
  foreach(i RANGE ${last})
    string(JSON id GET "${json}" ${ARGN} ${i})
    list(APPEND ids ${id})
  endforeach()
  string(REPLACE ";" "," ids "${ids}")
  set(${out_var} "${ids}" PARENT_SCOPE)
endfunction()

function(check_generated output index expected what)
  if(NOT output MATCHES "generated ids \\[${index}\\]: ([0-9,]*)")
    message(FATAL_ERROR "${what}: no 'generated ids [${index}]' line in:\n${output}")
  endif()
  if(NOT CMAKE_MATCH_1 STREQUAL expected)
    message(FATAL_ERROR "${what}: generated ${CMAKE_MATCH_1}\n"
                        "transformers:  ${expected}")
  endif()
  message(STATUS "${what}: ${CMAKE_MATCH_1} (equals transformers)")
endfunction()

build_against_prefix()

json_ids(first_prompt prompts 0 ids)
json_ids(first_expected prompts 0 generated)
run_checked(out ${WORK}/generate ${PLAN} --ids ${first_prompt} --max-new-tokens ${max_new}
            --ignore-eos)
message(STATUS "generate printed:\n${out}")
check_generated("${out}" 0 "${first_expected}" "generate (C), prompt 0 alone")
if(NOT out MATCHES "finish reason \\[0\\]: length")
  message(FATAL_ERROR "generate: the finish reason is not 'length':\n${out}")
endif()

set(batch_args "")
math(EXPR last "${prompt_count} - 1")
foreach(p RANGE ${last})
  json_ids(ids prompts ${p} ids)
  list(APPEND batch_args --ids ${ids})
endforeach()
run_checked(out ${WORK}/generate_cpp ${PLAN} ${batch_args} --max-new-tokens ${max_new}
            --ignore-eos)
foreach(p RANGE ${last})
  json_ids(expected prompts ${p} generated)
  check_generated("${out}" ${p} "${expected}" "generate_cpp (C++), batch row ${p}")
endforeach()

# A token id outside the vocabulary (its size is the logits' last dimension in the JSON's
# prefill logits) and a prompt + max_new_tokens over the plan's max_seq_len (PLAN_MAX_SEQ)
# are errors before anything runs.
string(JSON vocab LENGTH "${json}" prompts 0 prefill_last_logits)
run_expect_failure(1 "error: generating: DSRT_INVALID_ARGUMENT: [^\n]*${vocab}"
                   ${WORK}/generate ${PLAN} --ids 5,${vocab})
run_expect_failure(1 "error: DSRT_INVALID_ARGUMENT: [^\n]*${vocab}"
                   ${WORK}/generate_cpp ${PLAN} --ids 5,${vocab})
run_expect_failure(1 "error: generating: DSRT_INVALID_ARGUMENT: [^\n]*${PLAN_MAX_SEQ}"
                   ${WORK}/generate ${PLAN} --ids 5,6 --max-new-tokens ${PLAN_MAX_SEQ})
run_expect_failure(2 "error: --ids wants comma-separated integers"
                   ${WORK}/generate ${PLAN} --ids 5,,6)

run_checked(out ${WORK}/generate ${PLAN} --ids 5 --max-new-tokens 1)
if(out MATCHES "text \\[0\\]:")
  run_checked(out ${WORK}/generate ${PLAN} --prompt "Hello world" --max-new-tokens 4)
  if(NOT out MATCHES "prompt ids \\[0\\]: [0-9,]+\n" OR
     NOT out MATCHES "generated ids \\[0\\]: [0-9]+,[0-9]+,[0-9]+,[0-9]+\n" OR
     NOT out MATCHES "text \\[0\\]: ")
    message(FATAL_ERROR "generate --prompt printed:\n${out}")
  endif()
  message(STATUS "generate --prompt printed:\n${out}")
else()
  message(STATUS "the plan has no tokenizer: text prompts not checked")
endif()
