"""Results in the field's formats: other tools' benchmark exports read into a results folder of
ours, and a results folder written in the formats other tools read."""
