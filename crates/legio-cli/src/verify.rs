//! `legio verify`: the store's integrity report. Exit 0 when clean, 3 when anything is wrong.
//! Read-only: a sled database is verified on a private copy, never written.

use std::process::ExitCode;

use anyhow::Result;

use crate::common;

use crate::invocation::Context;

/// Arguments of `legio verify`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs the command.
pub fn run(context: &Context, _args: Args) -> Result<ExitCode> {
    if let Some(remote) = context.remote()? {
        let report = remote.get_json("/operator/verify", &[])?;
        outln!(
            "verified {} events up to seq {} on the running server",
            report["events"],
            report["last_seq"]
        );
        if report["clean"] == true {
            outln!("clean: no gaps, every record decodes, indexes agree with the events");
            return Ok(ExitCode::SUCCESS);
        }
        outln!("{} problems found:", report["total_findings"]);
        for finding in report["findings"].as_array().into_iter().flatten() {
            outln!("  {}", finding.as_str().unwrap_or_default());
        }
        return Ok(ExitCode::from(3));
    }
    let (log, read_around) = common::open_log_read_only(context)?;
    let report = log.verify(&mut |_| {})?;
    outln!(
        "verified {} events up to seq {} in {}",
        report.events,
        report.last_seq,
        common::log_location(context)?
    );
    let damaged = match &read_around {
        Some(why @ legio_store::ReadAround::Snapshot(_)) => {
            outln!("note: {why}");
            false
        }
        Some(why) => {
            outln!("problem: {why}");
            true
        }
        None => false,
    };
    if report.is_clean() && !damaged {
        outln!("clean: no gaps, every record decodes, indexes agree with the events");
        return Ok(ExitCode::SUCCESS);
    }
    if report.is_clean() {
        outln!("the events that read are clean; run `legio export --salvage` to keep them");
        return Ok(ExitCode::from(3));
    }
    outln!("{} problems found:", report.total_findings());
    for finding in &report.findings {
        outln!("  {finding}");
    }
    if report.total_findings() > report.findings.len() as u64 {
        outln!(
            "  ... and {} more",
            report.total_findings() - report.findings.len() as u64
        );
    }
    Ok(ExitCode::from(3))
}
