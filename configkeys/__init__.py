"""The vocabulary of config keys and values as the Pulumi CLI spells and stores them, below both
the stack model and the load generator: key paths as ``pulumi config set --path`` reads them and
``--set`` applies them (:mod:`configkeys.key_paths`), and the text fields that take the typed
scalars the CLI and YAML store (:mod:`configkeys.config_text`)."""
