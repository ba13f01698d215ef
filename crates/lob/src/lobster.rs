//! LOBSTER replay (placeholder while building).
