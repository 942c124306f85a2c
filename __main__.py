"""Pulumi entry point: `pulumi up -s <stack>` runs this. See components/program.py."""

from components.program import main

main(cluster_checks=True)
