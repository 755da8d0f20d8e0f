"""A booking tool that asks the user (MCP elicitation), on the high-level MCPServer
(mcp 2.x), stdio.

`book_table` needs the party size and a name: its parameter is filled by a resolver that
returns `Elicit[...]`. The SDK asks the way the negotiated protocol says: a 2026-07-28
client gets an `input_required` result with an `elicitation/create` input request and
retries with the answer (multi-round-trip requests, SEP-2322); a 2025-11-25 client gets
a standalone `elicitation/create` request mid-call. The tool says what it was told.
"""
from typing import Annotated

from pydantic import BaseModel, Field

from mcp.server.mcpserver import (
    AcceptedElicitation,
    Elicit,
    ElicitationResult,
    MCPServer,
    Resolve,
)

mcp = MCPServer(name="bookings", log_level="WARNING")


class Booking(BaseModel):
    name: str = Field(description="Who the table is for", min_length=1)
    guests: int = Field(description="How many people", ge=1, le=12)


def ask_booking() -> Elicit[Booking]:
    return Elicit("Who is the table for, and how many are you?", Booking)


@mcp.tool()
def book_table(
    booking: Annotated[ElicitationResult[Booking], Resolve(ask_booking)],
) -> str:
    """Books a table, asking the user for the details."""
    if isinstance(booking, AcceptedElicitation):
        return f"booked for {booking.data.name}, {booking.data.guests} guests"
    return f"not booked: {booking.action}"


if __name__ == "__main__":
    mcp.run("stdio")
