"""What tests use of rltool from inside it: fault injection at named points (kill, hang, slow)."""
