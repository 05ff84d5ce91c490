//! Progress on standard error for the long steps of a command: a bar or a spinner, hidden
//! when the caller asks (`--json`, or standard error is not a terminal).

/// A progress bar on stderr, hidden when stderr is not a terminal or for `--json`.
pub fn progress_bar(len: u64, msg: &'static str, hidden: bool) -> indicatif::ProgressBar {
    if hidden {
        return indicatif::ProgressBar::hidden();
    }
    let pb = indicatif::ProgressBar::new(len);
    pb.set_style(
        indicatif::ProgressStyle::with_template("{msg:<28} [{bar:30}] {pos}/{len} ({eta})")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    pb.set_message(msg);
    pb
}

/// A spinner on stderr, hidden when stderr is not a terminal or for `--json`.
pub fn spinner(hidden: bool) -> indicatif::ProgressBar {
    if hidden {
        return indicatif::ProgressBar::hidden();
    }
    let pb = indicatif::ProgressBar::new_spinner();
    pb.enable_steady_tick(std::time::Duration::from_millis(120));
    pb
}
