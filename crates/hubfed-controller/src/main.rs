fn main() {
    println!("hubfed-controller: not implemented yet");
}
