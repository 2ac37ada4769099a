"""The gRPC edge: the only package (besides tests) that imports behest._proto."""
