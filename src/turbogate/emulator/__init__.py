"""turbogate.emulator."""
