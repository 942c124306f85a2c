"""Shared pytest setup."""

import asyncio

# Pulumi's mocks (and asyncio code under test) need a current event loop on Python >= 3.12.
asyncio.set_event_loop(asyncio.new_event_loop())
