# Installed: include/attn/attn.h, lib/libattn.a, the CMake package (attn::attn) and attn.pc.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/attn DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
