//! Standard output that survives a closed pipe (`hostpipe history | head -1`).

/// Set once stdout's reader has gone (`hostpipe history | head -1`): later output is
/// dropped instead of panicking, and the command finishes (stopping its servers).
static STDOUT_CLOSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// `println!`, without the panic on a closed pipe.
macro_rules! outln {
    () => {
        $crate::output::emit(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::output::emit(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!`, without the panic on a closed pipe.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::output::emit(format_args!($($arg)*))
    };
}

pub(crate) fn emit(args: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    use std::sync::atomic::Ordering;
    if STDOUT_CLOSED.load(Ordering::Relaxed) {
        return;
    }
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = stdout.write_fmt(args).and_then(|()| stdout.flush()) {
        STDOUT_CLOSED.store(true, Ordering::Relaxed);
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            eprintln!("error: cannot write the output: {e}");
        }
    }
}
