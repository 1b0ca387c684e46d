// Forced into the files that wait on a std::condition_variable in a portable build
// (FLOWGRAD_PORTABLE=ON: the wheel). GCC 12's libstdc++ added condition_variable::wait at
// GLIBCXX_3.4.30, the one symbol that would make the wheel manylinux_2_35; binding the call to the
// GLIBCXX_3.4.11 entry (what GCC 4.5 to 11 link, still exported by every newer libstdc++) leaves
// the wheel at what glibc sets (manylinux_2_34). .symver in top-level asm binds the references of
// the file that holds it, so these files must not be LTO objects (flowgrad_core's are not).
#pragma once
#include <condition_variable>  // defines __GLIBCXX__ for the check below
#if defined(__GLIBCXX__) && defined(__x86_64__)
__asm__(".symver _ZNSt18condition_variable4waitERSt11unique_lockISt5mutexE,"
        "_ZNSt18condition_variable4waitERSt11unique_lockISt5mutexE@GLIBCXX_3.4.11");
#endif
