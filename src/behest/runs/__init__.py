"""Running agent runs: the executor (ownership, cancel, shutdown), the loop, the streams."""
