//! Failover time on a three-node legio cluster (three nats-servers, replicas 3, lease TTL 2 s):
//! the owner of a conversation is SIGKILLed while a post is in flight, and the time from the kill
//! to the first post answered by another node is measured, over 20 kills (`LEGIO_BENCH_KILLS`).
//! Prints p50, p99 and max against the goal (TTL + 1 s). Run:
//! `cargo bench -p legio-cli --bench failover`. Needs nats-server (see `tests/support/nats.rs`).

#[path = "../../../tests/cluster/legion.rs"]
mod legion;

use std::time::{Duration, Instant};

use legion::{post, post_until_served, Legion, TTL};

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!(
            "failover: benchmark only; run it with `cargo bench -p legio-cli --bench failover`"
        );
        return;
    }
    let kills: usize = std::env::var("LEGIO_BENCH_KILLS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(20);
    let Some(mut legion) = Legion::start(20) else {
        return;
    };
    const CONV: &str = "failover:1";
    post_until_served(&legion, 0, CONV, "@all start", Duration::from_secs(30));
    let mut times = Vec::new();
    for kill in 0..kills {
        let owner = legion.owner(CONV).expect("an owner");
        let i = legion.node_index(&owner);
        let base = legion.nodes[i].base.clone();
        let inflight = std::thread::spawn(move || post(&base, CONV, "@all in flight"));
        std::thread::sleep(Duration::from_millis(10));
        legion.kill(i);
        let killed = Instant::now();
        post_until_served(
            &legion,
            i + 1,
            CONV,
            &format!("@ann after kill {kill}"),
            Duration::from_secs(30),
        );
        let took = killed.elapsed();
        let _ = inflight.join();
        println!("kill {kill:>2} of {owner}: another node answered after {took:.2?}");
        times.push(took);
        legion.restart(i);
    }
    times.sort();
    let at = |p: f64| times[((times.len() as f64 * p).ceil() as usize).clamp(1, times.len()) - 1];
    let goal = TTL + Duration::from_secs(1);
    println!();
    println!(
        "failover over {kills} kills (lease TTL {TTL:?}): p50 {:.2?}, p99 {:.2?}, max {:.2?}",
        at(0.5),
        at(0.99),
        times[times.len() - 1]
    );
    println!(
        "goal: p99 < TTL + 1 s = {goal:?}: {}",
        if at(0.99) < goal { "met" } else { "NOT met" }
    );
}
