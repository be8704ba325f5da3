//! `ralph-ctl`: start, inspect, reset and install the Ralph loop.

use clap::Parser;

fn main() {
    ralph_core::persist::store::ignore_file_size_signal();
    let cli = ralph_ctl::cli::Cli::parse();
    std::process::exit(ralph_ctl::run(cli));
}
