"""`wg-mesh init`'s gateway size question: the cloud's priced types, smallest first, each with what one gateway
costs a month idle in the site's region (the instance and its public address, from the bundled prices:
wg_mesh.tools.instanceprices and wg_mesh/tools/prices.yaml), the default marked. Pure text and choice.
"""

from __future__ import annotations

from dataclasses import dataclass

from wg_mesh.tools import instanceprices, prices, stackcost


@dataclass(frozen=True)
class Choice:
    instance_type: str
    vcpus: int
    memory_gib: float
    arch: str
    monthly_usd: float | None  # None: the bundled prices have none for this region


@dataclass(frozen=True)
class Menu:
    """The sizes offered for one site: its cloud's priced types, in its region, the default first."""

    cloud: str
    region: str
    as_of: str
    choices: tuple[Choice, ...]
    default: str

    def text(self, site: str) -> str:
        lines = [
            f"  {site}: gateway size, with one gateway's idle month in {self.region} (instance + public address, "
            f"USD, list prices as of {self.as_of}; an HA pair costs twice that):"
        ]
        for number, choice in enumerate(self.choices, 1):
            usd = "    ?  " if choice.monthly_usd is None else f"{choice.monthly_usd:7,.2f}"
            mark = "  (default)" if choice.instance_type == self.default else ""
            arm = ", arm64" if choice.arch == "arm64" else ""
            lines.append(
                f"    {number:>2}) {choice.instance_type:<16} {choice.vcpus:>3} vCPU {choice.memory_gib:>5g} GiB"
                f"{arm:<7} {usd}/month{mark}"
            )
        if any(choice.monthly_usd is None for choice in self.choices):
            lines.append(f"     ?: no bundled price for that type in {self.region} (`wg-mesh cost --stack` says why)")
        lines.append("     or type any other instance type")
        return "\n".join(lines)

    def pick(self, answer: str) -> str | None:
        """The instance type an answer means: empty (the default), a number from the menu, or a type typed in (the
        model checks its form); None: a number outside the menu."""
        if not answer:
            return self.default
        if answer.isdigit():
            number = int(answer)
            return self.choices[number - 1].instance_type if 1 <= number <= len(self.choices) else None
        return answer


def menu(cloud: str, region: str) -> Menu:
    """The sizes to offer a `cloud` site in `region`: the default first, then the rest smallest first."""
    table = instanceprices.load().cloud(cloud)
    bundled = prices.load()
    address = bundled.prices[stackcost.address_price_key(bundled, cloud, region)].value or 0.0
    default = stackcost.DEFAULT_TYPES[cloud]
    choices = []
    for name, shape in table.types.items():
        hourly = table.hourly(name, region)
        monthly = None if hourly is None else (hourly + address) * bundled.hours_per_month
        choices.append(Choice(name, shape.vcpus, shape.memory_gib, shape.arch, monthly))
    choices.sort(key=lambda c: (c.instance_type != default, c.vcpus, c.memory_gib, c.instance_type))
    return Menu(cloud, region, str(instanceprices.load().as_of), tuple(choices), default)
