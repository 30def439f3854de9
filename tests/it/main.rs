//! The workspace's integration tests, one binary with a module per area.

mod contract;
mod crash;
mod fuzz;
mod golden;
mod golden_log;
mod json_lines;
mod memory;
mod message_codec;
mod model;
mod nats;
mod nats_creds;
mod runtime;
mod salvage;
mod sled_log;
mod storage_faults;
mod tidy;
mod tool_links;
mod verify;
