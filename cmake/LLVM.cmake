# The LLVM CPU backend: core/src/codegen/llvm, compiled into the core library.
# LLVM is linked as its one shared library: static LLVM makes every link take
# minutes on 2 cores.
find_program(LLVM_CONFIG NAMES llvm-config-19 llvm-config REQUIRED)
execute_process(COMMAND ${LLVM_CONFIG} --includedir OUTPUT_VARIABLE LLVM_INCLUDE_DIR OUTPUT_STRIP_TRAILING_WHITESPACE)
execute_process(COMMAND ${LLVM_CONFIG} --libdir OUTPUT_VARIABLE LLVM_LIB_DIR OUTPUT_STRIP_TRAILING_WHITESPACE)
execute_process(COMMAND ${LLVM_CONFIG} --link-shared --libs OUTPUT_VARIABLE LLVM_LIBS OUTPUT_STRIP_TRAILING_WHITESPACE)
separate_arguments(LLVM_LIBS)
file(GLOB KILN_LLVM_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/src/codegen/llvm/*.cpp)
if(KILN_LLVM_SOURCES)
  target_sources(kiln PRIVATE ${KILN_LLVM_SOURCES})
  # LLVM headers only in the backend's own files, as system headers.
  # -isystem: LLVM's headers trip -Wextra warnings that are not ours to fix.
  set_source_files_properties(${KILN_LLVM_SOURCES} PROPERTIES COMPILE_OPTIONS "-isystem;${LLVM_INCLUDE_DIR}")
  target_link_directories(kiln PRIVATE ${LLVM_LIB_DIR})
  target_link_libraries(kiln PRIVATE ${LLVM_LIBS})
  target_compile_definitions(kiln PUBLIC KILN_WITH_LLVM=1)
endif()
