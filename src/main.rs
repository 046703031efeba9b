//! The `ag-box` binary (the CLI lives in the library).

fn main() -> std::process::ExitCode {
    ag_box::main()
}
