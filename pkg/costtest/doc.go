// Package costtest measures how the cost of a function grows with the size of its input, so
// that tests can assert that a walk or parser of untrusted input allocates and answers at most
// linearly in the request (a request that costs quadratically is a denial of service, however
// small it is). It measures bytes allocated with runtime.MemStats.TotalAlloc deltas, which
// counts every allocation, not the number of allocations.
package costtest
