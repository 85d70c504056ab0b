fn main() {
    println!("hubfedctl: not implemented yet");
}
