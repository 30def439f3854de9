//! Benchmark placeholder, replaced by the real bench.
fn main() {}
