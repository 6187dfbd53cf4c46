// stb_image's implementation, compiled from Debian's header (libstb-dev) for the fuzz build only:
// the same decoder libstb.so holds, instrumented so that libFuzzer sees its branches and ASan its
// reads and writes.
#define STB_IMAGE_IMPLEMENTATION
#include <stb_image.h>
