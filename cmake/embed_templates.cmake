# Embeds every file under templates/ into a generated C++ source as a table of
# {relative path, text}. Templates are read only at build time: the binaries
# never look at the source tree. A template edit re-runs the generator.
function(qjit_embed_templates dir out)
  file(GLOB_RECURSE files CONFIGURE_DEPENDS RELATIVE ${dir} ${dir}/*.cu ${dir}/*.cuh)
  list(SORT files)
  set(abs "")
  foreach(f ${files})
    list(APPEND abs ${dir}/${f})
  endforeach()
  add_custom_command(OUTPUT ${out}
    COMMAND ${CMAKE_COMMAND} -DDIR=${dir} -DOUT=${out} -P ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/embed_run.cmake
    DEPENDS ${abs} ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/embed_run.cmake
    COMMENT "Embedding CUDA templates")
endfunction()
