//! The `jasper` command-line tool.

fn main() {
    println!("jasper");
}
