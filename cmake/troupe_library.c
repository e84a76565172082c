/* troupe — the shared library's own object (CMakeLists.txt: libtroupe.so is every module's
 * static library, whole; a shared library needs one source of its own). Its version, for a
 * debugger or `strings` on an installed libtroupe.so. */
#include "troupe_config.h"

const char troupe__library_version[] = "troupe " TROUPE_VERSION_STRING;
