// The test runner: doctest's own main. Each tests/test_<concept>.cpp adds its cases.
//
// ctest runs this executable twice, the decoder LMs' files (--source-file=*test_causal_lm.cpp,
// *test_decoder_lm.cpp) apart from the rest (--source-file-exclude=...): a process may compile only ~119
// Neural Engine programs, a limit the simulator enforces as the framework does, and the whole suite compiles
// more than that. Run it the same way by hand, or through ctest.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
