"""One module per ``interpscale`` subcommand: ``add_arguments(parser)`` and ``run(args) -> int``."""
