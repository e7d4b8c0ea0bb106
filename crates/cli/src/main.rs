//! `pvfs`: the one binary of the file system — servers, administration, the command
//! line client, benchmarks and the demo. Every subcommand lives in `cmd/`.

mod cmd;
mod output;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, CommandFactory, Parser, Subcommand};

/// A parallel file system for Linux clusters: servers, administration, the client,
/// benchmarks and a demo, in one binary.
#[derive(Parser)]
#[command(name = "pvfs", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Where the file system's configuration is.
#[derive(Args, Clone)]
pub struct ConfigArg {
    /// The file system's configuration file.
    #[arg(long, short = 'c', env = "PVFS_CONFIG", value_name = "FILE")]
    pub config: PathBuf,
}

#[derive(Subcommand)]
enum Command {
    /// Write a configuration file (and its key files) for a new file system.
    Genconfig(cmd::genconfig::GenconfigArgs),
    /// Make, rotate or retire a key file.
    Keygen(cmd::keygen::KeygenArgs),
    /// Run one server in the foreground.
    Server(cmd::server::ServerArgs),
    /// Start every server of a configuration in the background.
    Start(cmd::server::StartArgs),
    /// Stop every server of a configuration (SIGTERM, wait, report).
    Stop(cmd::server::StopArgs),
    /// Check that every server answers, with round-trip times.
    Ping(cmd::admin::PingArgs),
    /// Space and objects per server and in total.
    Df(cmd::admin::DfArgs),
    /// Health of every server: ok, degraded (with the reason) or down; exit 1 unless all are ok.
    Status(cmd::admin::StatusArgs),
    /// Every server's operation rates, bandwidth and latency, refreshed in the terminal.
    Top(cmd::top::TopArgs),
    /// Make everything the file system acknowledged stable on every server's disk (as sync(1)).
    Sync(cmd::admin::SyncArgs),
    /// List a directory.
    Ls(cmd::namespace::LsArgs),
    /// Show the attributes of a file, directory or symlink.
    Stat(cmd::namespace::StatArgs),
    /// Create directories.
    Mkdir(cmd::namespace::MkdirArgs),
    /// Remove files (and directories with -r).
    Rm(cmd::namespace::RmArgs),
    /// Rename or move.
    Mv(cmd::namespace::MvArgs),
    /// Create a hard link, or a symbolic link with -s.
    Ln(cmd::namespace::LnArgs),
    /// Print files to standard output.
    Cat(cmd::cat::CatArgs),
    /// Copy files: local to pvfs, pvfs to local, pvfs to pvfs (pvfs paths are written pvfs:/path).
    Cp(cmd::cp::CpArgs),
    /// Show where every stripe of a file lives.
    Layout(cmd::layout::LayoutArgs),
    /// Set the default layout of new files in a directory.
    Setlayout(cmd::layout::SetlayoutArgs),
    /// Benchmarks.
    Bench(cmd::bench::BenchArgs),
    /// Run a local 4-server file system with a short workload, then clean up.
    Demo(cmd::demo::DemoArgs),
    /// Check the whole file system across servers (and repair with --repair).
    Fsck(cmd::fsck::FsckArgs),
    /// Check every block of every datafile against its checksum, mending damaged ones from other copies.
    Scrub(cmd::scrub::ScrubArgs),
    /// Move a share of the copies of replicated files onto data servers added to the file system.
    Rebalance(cmd::server::RebalanceArgs),
    /// Mount a file system with FUSE (in the background unless --foreground).
    Mount(cmd::mount::MountArgs),
    /// Unmount a FUSE mount (also when its daemon is dead or hung).
    Umount(cmd::mount::UmountArgs),
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            // --help and --version: clap's own output.
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("pvfs: {}", usage_error(&e));
            return ExitCode::from(2);
        }
    };
    let result = match cli.command {
        Command::Genconfig(a) => cmd::genconfig::run(a),
        Command::Keygen(a) => cmd::keygen::run(a),
        Command::Server(a) => cmd::server::run_server(a),
        Command::Start(a) => cmd::server::start(a),
        Command::Stop(a) => cmd::server::stop(a),
        Command::Ping(a) => cmd::admin::ping(a),
        Command::Df(a) => cmd::admin::df(a),
        Command::Status(a) => cmd::admin::status(a),
        Command::Top(a) => cmd::top::run(a),
        Command::Sync(a) => cmd::admin::sync(a),
        Command::Ls(a) => cmd::namespace::ls(a),
        Command::Stat(a) => cmd::namespace::stat(a),
        Command::Mkdir(a) => cmd::namespace::mkdir(a),
        Command::Rm(a) => cmd::namespace::rm(a),
        Command::Mv(a) => cmd::namespace::mv(a),
        Command::Ln(a) => cmd::namespace::ln(a),
        Command::Cat(a) => cmd::cat::run(a),
        Command::Cp(a) => cmd::cp::run(a),
        Command::Layout(a) => cmd::layout::layout(a),
        Command::Setlayout(a) => cmd::layout::setlayout(a),
        Command::Bench(a) => cmd::bench::run(a),
        Command::Demo(a) => cmd::demo::run(a),
        Command::Fsck(a) => cmd::fsck::run(a),
        Command::Scrub(a) => cmd::scrub::run(a),
        Command::Rebalance(a) => cmd::server::rebalance(a),
        Command::Mount(a) => cmd::mount::mount(a),
        Command::Umount(a) => cmd::mount::umount(a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("pvfs: {}", one_line(&e));
            if e.downcast_ref::<cmd::UsageError>().is_some() {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

/// The one-line message of a failed command: the contexts this binary added, then the
/// error they wrap.
///
/// The project's policy: an error's `Display` is its whole message, its cause
/// included (that text is what servers send and what logs show), and `source()` may
/// return that cause too for programs that inspect it. So the chain is walked only
/// while a link does not already say what the next one says: the first link whose
/// text contains the next link's (without the "(os error N)" suffix) ends the
/// message, and nothing is printed twice.
fn one_line(e: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if let Some(prev) = parts.last() {
            if prev.contains(without_os_error(&text).trim()) {
                break;
            }
        }
        parts.push(text);
    }
    // Messages are one line whatever a cause holds.
    parts
        .join(": ")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

/// `text` without the " (os error N)" that `std::io::Error` appends.
fn without_os_error(text: &str) -> &str {
    match text.rfind(" (os error ") {
        Some(i) if text.ends_with(')') => &text[..i],
        _ => text,
    }
}

/// The one-line message of a usage error, naming the help of the command at fault.
fn usage_error(e: &clap::Error) -> String {
    // The subcommands named on the command line, e.g. ["bench"].
    let mut command = Cli::command();
    let mut path = String::new();
    for arg in std::env::args_os().skip(1) {
        let Some(sub) = arg
            .to_str()
            .and_then(|a| command.find_subcommand(a))
            .cloned()
        else {
            break;
        };
        path.push(' ');
        path.push_str(sub.get_name());
        command = sub;
    }
    let help = format!("see pvfs{path} --help");
    if e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
        let names: Vec<&str> = command
            .get_subcommands()
            .filter(|c| !c.is_hide_set())
            .map(|c| c.get_name())
            .collect();
        return if path.is_empty() {
            format!("no command given ({help}, or try pvfs demo)")
        } else {
            format!(
                "{}: no subcommand given: one of {} ({help})",
                path.trim_start(),
                names.join(", ")
            )
        };
    }
    let text = e.to_string();
    let message: Vec<&str> = text
        .lines()
        .take_while(|l| !l.trim().is_empty() && !l.starts_with("Usage:"))
        .map(str::trim)
        .collect();
    let message = message.join(" ");
    let message = message.strip_prefix("error: ").unwrap_or(&message);
    format!("{message} ({help})")
}
