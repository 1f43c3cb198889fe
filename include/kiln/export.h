/* What libkiln.so exports. Note [Exported symbols]: the library is compiled
 * with -fvisibility=hidden, so only what a public header declares is
 * visible to programs and extensions: the stable C shim's functions, each
 * marked KILN_API, and the C++ API of include/kiln, whose headers declare
 * everything between KILN_API_BEGIN and KILN_API_END (the same attribute
 * over a region: a nested namespace definition cannot carry an attribute).
 * Internals (src/, kiln::cpu and the like) stay hidden: a smaller dynamic
 * symbol table, faster links and calls inside the library that need no
 * PLT. Tests that reach internals link the objects (kiln-objects) instead.
 * C as well as C++: the stable C header includes it. */
#ifndef KILN_EXPORT_H
#define KILN_EXPORT_H

#define KILN_API __attribute__((visibility("default")))
#define KILN_API_BEGIN _Pragma("GCC visibility push(default)")
#define KILN_API_END _Pragma("GCC visibility pop")
/* A template of the public headers that every program instantiates for
 * itself (message formatting): the library's own instantiations, hundreds,
 * need not be exported. */
#define KILN_HIDDEN __attribute__((visibility("hidden")))

#endif /* KILN_EXPORT_H */
