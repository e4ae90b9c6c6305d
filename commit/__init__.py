"""The commit coordinator: transactions -> manifests, commit handlers,
conflict checks and retries."""
