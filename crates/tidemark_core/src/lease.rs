//! What the leases of every subsystem share (DESIGN.md "Many nodes": leases with fencing
//! tokens): the name a process holds its leases under. Each subsystem keeps its leases where
//! its shared state is (chat: the Redis hot store; events: the MariaDB summary tier).

/// A holder name of this process's own, `<host>-<pid>-<random>`: two processes never share
/// one, even on one host or after a pid is reused.
pub fn holder_name() -> String {
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "node".into());
    format!(
        "{host}-{}-{:012x}",
        std::process::id(),
        rand::random::<u64>() >> 16
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn holder_names_differ_within_a_process() {
        let (a, b) = (super::holder_name(), super::holder_name());
        assert_ne!(a, b);
        assert!(a.contains(&format!("-{}-", std::process::id())), "{a}");
    }
}
