//! `hubfed-agent`: the agent of a pull-mode member (see [`hubfed_controller::agent`]).

fn main() {
    hubfed_controller::agent::main();
}
