//! The store's metrics, through the `metrics` facade (a host installs the exporter).

use std::time::Duration;

/// Events appended.
pub const APPENDS: &str = "legio_store_appended_events_total";
/// Events per commit group (histogram).
pub const COMMIT_GROUP_EVENTS: &str = "legio_store_commit_group_events";
/// Seconds from submit to acknowledgement (histogram).
pub const APPEND_LATENCY: &str = "legio_store_append_latency_seconds";
/// fsync/fdatasync calls made by the committer.
pub const FSYNCS: &str = "legio_store_fsyncs_total";
/// Bytes of keys and values written.
pub const BYTES_WRITTEN: &str = "legio_store_bytes_written_total";
/// Reads, labelled by `kind`.
pub const READS: &str = "legio_store_reads_total";
/// Problems `verify` found, labelled by `kind`.
pub const VERIFY_FINDINGS: &str = "legio_store_verify_findings_total";
/// The last acknowledged seq (gauge).
pub const LAST_SEQ: &str = "legio_store_last_seq";
/// Seconds each step of a commit cycle took (histogram), labelled by `step`: `apply` (the
/// group's events and state into sled), `flush` (sled's flush), `fdatasync` (of sled's data file).
/// `flush` and `fdatasync` are also recorded for the log's other syncs (open, flush, close).
pub const COMMIT_STEP: &str = "legio_store_commit_step_seconds";
/// Seconds each write of the list overlay took (histogram): the lists writer's, or a flush's or
/// close's.
pub const LIST_WRITE: &str = "legio_store_list_write_seconds";

/// Explicit buckets for [`APPEND_LATENCY`] (and [`COMMIT_STEP`] and [`LIST_WRITE`]), in
/// seconds (50 µs to 1 s), for the exporter.
pub const APPEND_LATENCY_BUCKETS: [f64; 14] = [
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
];
/// Explicit buckets for [`COMMIT_GROUP_EVENTS`].
pub const COMMIT_GROUP_BUCKETS: [f64; 10] =
    [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 512.0, 4096.0];

/// Registers descriptions of the store's metrics with the installed recorder.
pub fn describe() {
    metrics::describe_counter!(APPENDS, "Events appended to the log");
    metrics::describe_histogram!(COMMIT_GROUP_EVENTS, "Events committed per group commit");
    metrics::describe_histogram!(
        APPEND_LATENCY,
        metrics::Unit::Seconds,
        "Time from submitting an append to its acknowledgement"
    );
    metrics::describe_counter!(FSYNCS, "fsync/fdatasync calls made by the committer");
    metrics::describe_counter!(
        BYTES_WRITTEN,
        metrics::Unit::Bytes,
        "Bytes of keys and values written"
    );
    metrics::describe_counter!(READS, "Reads of the log, by kind");
    metrics::describe_counter!(VERIFY_FINDINGS, "Problems found by verify, by kind");
    metrics::describe_gauge!(LAST_SEQ, "The last acknowledged seq");
    metrics::describe_histogram!(
        COMMIT_STEP,
        metrics::Unit::Seconds,
        "Time each step of a commit cycle took, by step (apply, flush, fdatasync)"
    );
    metrics::describe_histogram!(
        LIST_WRITE,
        metrics::Unit::Seconds,
        "Time each write of the list overlay took"
    );
}

pub(crate) fn read(kind: &'static str) {
    metrics::counter!(READS, "kind" => kind).increment(1);
}

pub(crate) fn committed(events: u64, bytes: u64, last_seq: u64) {
    metrics::counter!(APPENDS).increment(events);
    metrics::counter!(BYTES_WRITTEN).increment(bytes);
    metrics::histogram!(COMMIT_GROUP_EVENTS).record(events as f64);
    metrics::gauge!(LAST_SEQ).set(last_seq as f64);
}

/// A commit step (`apply`, `flush`, `fdatasync`) took `took`.
pub(crate) fn commit_step(step: &'static str, took: Duration) {
    metrics::histogram!(COMMIT_STEP, "step" => step).record(took.as_secs_f64());
}

pub(crate) fn list_write(took: Duration) {
    metrics::histogram!(LIST_WRITE).record(took.as_secs_f64());
}

pub(crate) fn fsyncs(n: u64) {
    metrics::counter!(FSYNCS).increment(n);
}

pub(crate) fn ack_latency(latency: Duration) {
    metrics::histogram!(APPEND_LATENCY).record(latency.as_secs_f64());
}

pub(crate) fn verify_finding(kind: &'static str) {
    metrics::counter!(VERIFY_FINDINGS, "kind" => kind).increment(1);
}
