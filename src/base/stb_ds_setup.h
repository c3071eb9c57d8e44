// Include stb_ds through here: in strict C17 mode gcc spells the typeof extension `__typeof__`,
// which stb_ds's hash-map macros need.
#ifndef MICRO_STB_DS_SETUP_H
#define MICRO_STB_DS_SETUP_H
#ifndef typeof
#define typeof __typeof__
#endif
#include "stb_ds.h"
#endif
