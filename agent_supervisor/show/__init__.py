"""Show: command-line views of the store (the admin API and dashboard come later)."""
