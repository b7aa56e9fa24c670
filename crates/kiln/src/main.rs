//! The `kiln` binary: parses the command line, wires the crates together, prints.
//! Errors become one line on stderr and a non-zero exit code, never a panic trace.

#[macro_use]
mod stdout;
mod capacity_cmd;
mod cli;
mod compare_cmd;
mod comparison;
mod demo;
mod doctor_cmd;
mod exit;
mod findings_cmd;
mod format;
mod hedge_cmd;
mod history_cmd;
mod k8s_cmd;
mod merge_cmd;
mod plan_cmd;
mod profile_cmd;
mod queries_cmd;
mod report_cmd;
mod run_cmd;
mod summary;
mod target_process;
mod traces;
mod watch_cmd;

use std::io::Write as _;
use std::process::ExitCode;

use clap::Parser;
use kiln_load::StopSignal;

use crate::cli::{Cli, Command};

/// Ctrl-C, SIGTERM or SIGHUP once stops the run gracefully and keeps its record, named for
/// the signal; twice exits now.
fn watch_for_interrupts(stop: StopSignal) {
    let _ = std::thread::Builder::new()
        .name("kiln-signals".into())
        .spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async move {
                use tokio::signal::unix::{signal, SignalKind};
                let (Ok(mut int), Ok(mut term), Ok(mut hup)) = (
                    signal(SignalKind::interrupt()),
                    signal(SignalKind::terminate()),
                    signal(SignalKind::hangup()),
                ) else {
                    return;
                };
                for round in 0.. {
                    let (signo, name) = tokio::select! {
                        _ = int.recv() => (libc::SIGINT, "Ctrl-C"),
                        _ = term.recv() => (libc::SIGTERM, "SIGTERM"),
                        _ = hup.recv() => (libc::SIGHUP, "SIGHUP"),
                    };
                    if round > 0 {
                        std::process::exit(exit::signal_exit_code(signo).into());
                    }
                    // A closed terminal (SIGHUP) cannot take the message: ignore the error.
                    let _ = writeln!(
                        std::io::stderr(),
                        "\nkiln: {name}: finishing the run record ({name} again to quit now)"
                    );
                    stop.interrupt(signo, &format!("interrupted by {name}"));
                }
            });
        });
}

/// Keeps large allocations on the heap. Every per-second latency histogram read from a run
/// record is a ~350 KiB array; above glibc's mmap threshold each one was a fresh mapping,
/// faulted in page by page and unmapped again, which made reading records (kiln merge of 16
/// shards, report, findings, compare) three times slower than with the heap reused.
fn keep_large_allocations_on_the_heap() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only sets the allocator's parameters; it is called before any thread
    // starts.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 64 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 128 << 20);
    }
}

fn main() -> ExitCode {
    keep_large_allocations_on_the_heap();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return exit::bad_flag(e),
    };
    // commands that run until stopped watch for interrupts; the demo's shop handles its own
    // signals (it flushes its traces first)
    let interrupts = || {
        let stop = StopSignal::new();
        watch_for_interrupts(stop.clone());
        stop
    };
    let result = match cli.command {
        Command::Run(args) => run_cmd::run(*args, &interrupts()),
        Command::Capacity(args) => capacity_cmd::run(*args, &interrupts()),
        Command::Report(args) => report_cmd::run(args),
        Command::Findings(args) => findings_cmd::run(args),
        Command::Compare(args) => compare_cmd::run(args),
        Command::History(args) => history_cmd::run(args),
        Command::Hedge(args) => hedge_cmd::run(args),
        Command::Merge(args) => merge_cmd::run(args),
        Command::K8s(cli::K8sCommand::Job(args)) => k8s_cmd::job(args),
        Command::Demo(args) => demo::run(args, &interrupts()),
        Command::DemoShop(args) => demo::serve_shop(args),
        Command::Watch(args) => watch_cmd::run(args, &interrupts()),
        Command::Profile(args) => profile_cmd::run(args, &interrupts()),
        Command::Doctor(args) => doctor_cmd::run(args),
        Command::Setup(cli::SetupCommand::AsyncProfiler(args)) => setup_async_profiler(args),
        Command::Queries(args) => queries_cmd::run(args, &interrupts()),
        Command::Plan(command) => plan_cmd::run(command),
    };
    finish(result)
}

/// `kiln setup async-profiler`: fetched, checked, kept; the path said.
fn setup_async_profiler(args: cli::SetupAsyncProfilerArgs) -> anyhow::Result<u8> {
    use kiln_runtime::async_profiler::{setup, VERSION};
    if args.jar.is_none() {
        eprintln!("kiln: fetching async-profiler {VERSION} from Maven Central");
    }
    let path = setup(args.dir.as_deref(), args.jar.as_deref()).map_err(anyhow::Error::msg)?;
    outln!("async-profiler {VERSION}: {}", path.display());
    Ok(0)
}

/// The exit code, and the error as one line.
fn finish(result: anyhow::Result<u8>) -> ExitCode {
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            let text = exit::error_text(e.as_ref());
            eprintln!("kiln: error: {}", format::safe_text(&text));
            ExitCode::from(1)
        }
    }
}
