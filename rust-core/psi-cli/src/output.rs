//! Standard output for a command-line tool: a closed pipe ends the program quietly.

/// Installs a panic hook that turns `println!`'s panic on a closed standard output
/// (`EPIPE`, as in `psi match --json | head`) into a quiet exit with status 0, as a
/// command killed by SIGPIPE would; every other panic is reported as before.
pub fn quiet_on_broken_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if message.starts_with("failed printing to stdout") && message.contains("Broken pipe") {
            std::process::exit(0);
        }
        default(info);
    }));
}
