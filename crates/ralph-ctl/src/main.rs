//! `ralph-ctl`: start, inspect, reset and install the Ralph loop.

fn main() {
    ralph_core::persist::store::ignore_file_size_signal();
    std::process::exit(ralph_ctl::main());
}
