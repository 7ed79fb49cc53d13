"""One module per figure or study: run(config) -> table; plot(table) -> png."""
