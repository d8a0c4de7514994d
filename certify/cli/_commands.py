"""The subcommands of `certify`: module names in this package, each with add_parser(subparsers) and run(args)."""

COMMANDS: tuple[str, ...] = (
    "_demo",
    "_layer",
    "_experiment",
    "_proofs",
    "_compare",
    "_tightness",
    "_model",
)
