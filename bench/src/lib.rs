//! perftest-compatible latency benchmarks, generic over `verbs` (filled by the benchmark issue).
#![cfg_attr(not(test), no_std)]
