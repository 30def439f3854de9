//! Property test of exactly-once context delivery (filled in next).
