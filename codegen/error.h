// qjit::Error (the public qjit/error.h) and QJIT_CHECK for the library's own code.
#pragma once
#include <string>
#include "qjit/error.h"

// QJIT_CHECK(cond, stage, msg): throw qjit::Error with file:line when cond fails.
#define QJIT_CHECK(cond, stage, msg)                                                    \
  do {                                                                                  \
    if (!(cond))                                                                        \
      throw ::qjit::Error((stage), std::string(msg) + " [" + __FILE__ + ":" +          \
                                       std::to_string(__LINE__) + "]");                 \
  } while (0)
