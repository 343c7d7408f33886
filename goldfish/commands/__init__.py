"""One module per ``goldfish`` subcommand: ``DESCRIPTION``, ``add_arguments(parser)``, ``run(args)``."""
