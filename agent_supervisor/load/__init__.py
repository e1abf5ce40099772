"""Agent-like load for calibration, benchmarks and the chaos suite."""
