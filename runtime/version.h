/* Library version. CMake reads the three numbers from this file. */
#ifndef PINCER_RUNTIME_VERSION_H
#define PINCER_RUNTIME_VERSION_H

#ifdef __cplusplus
extern "C" {
#endif

#define PC_VERSION_MAJOR 0
#define PC_VERSION_MINOR 1
#define PC_VERSION_PATCH 0
#define PC_VERSION_STRING "0.1.0"
#define PC_VERSION_NUMBER (PC_VERSION_MAJOR * 10000 + PC_VERSION_MINOR * 100 + PC_VERSION_PATCH)

/* The version of the library linked at run time, e.g. "0.1.0". */
const char *pc_version(void);

#ifdef __cplusplus
}
#endif
#endif
