//! Headless Chromium for the tests that load the dashboard as a browser does: finding it (or
//! saying why the test is skipped, or failing under CI=true), and the page's DOM once its
//! scripts ran.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long Chromium may take to load a page and run its scripts before the test gives up.
const HUNG: Duration = Duration::from_secs(120);

/// The first of `chromium`, `chromium-browser` and `google-chrome` that runs; `None` after
/// [`crate::component_missing`] said it is missing (which panics under CI=true).
pub fn find() -> Option<&'static str> {
    let found = ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|b| {
            Command::new(b)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        });
    if found.is_none() {
        crate::component_missing(
            "chromium (or chromium-browser, google-chrome) on PATH",
            "apt-get install chromium (`.ci/run` installs it)",
        );
    }
    found
}

/// The flags every headless run takes: no sandbox, GPU, network chatter or first-run pages,
/// and a profile of its own under `profile`.
pub fn headless_args(profile: &Path) -> Vec<String> {
    [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-quic",
        "--no-first-run",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
    ]
    .into_iter()
    .map(String::from)
    .chain([format!(
        "--user-data-dir={}",
        profile.join("profile").display()
    )])
    .collect()
}

/// Loads `url` in headless `chromium` and answers the DOM as the page's scripts left it after
/// `scripts_for` of virtual time. Panics if Chromium fails or takes longer than two minutes.
pub fn dump_dom(chromium: &str, url: &str, scripts_for: Duration) -> String {
    let profile = tempfile::tempdir().expect("a profile folder");
    let mut child = Command::new(chromium)
        .args(headless_args(profile.path()))
        .args([
            "--dump-dom".to_owned(),
            format!("--virtual-time-budget={}", scripts_for.as_millis()),
            url.to_owned(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("chromium starts");
    // Read both pipes while it runs: a page bigger than a pipe's buffer would block it.
    let read = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut bytes);
            }
            bytes
        })
    };
    let stdout = read(child.stdout.take().map(|p| Box::new(p) as _));
    let stderr = read(child.stderr.take().map(|p| Box::new(p) as _));
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for chromium") {
            break status;
        }
        if started.elapsed() > HUNG {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium hung on {url} for {HUNG:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let (stdout, stderr) = (stdout.join().unwrap(), stderr.join().unwrap());
    assert!(
        status.success(),
        "chromium failed on {url}: {status}\n{}",
        String::from_utf8_lossy(&stderr)
    );
    String::from_utf8_lossy(&stdout).into_owned()
}

/// The text of the element with id `id` in `dom` (up to its first child tag), if any.
pub fn text_of<'a>(dom: &'a str, id: &str) -> Option<&'a str> {
    let (_, rest) = dom.split_once(&format!("id=\"{id}\""))?;
    let (_, rest) = rest.split_once('>')?;
    rest.split_once('<').map(|(text, _)| text)
}
