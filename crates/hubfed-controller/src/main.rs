//! `hubfed-controller`: the hubfed control plane (see [`hubfed_controller::process`]).

fn main() {
    hubfed_controller::process::main();
}
