// The test runner: doctest's own main. Each tests/test_<concept>.cpp adds its cases.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
