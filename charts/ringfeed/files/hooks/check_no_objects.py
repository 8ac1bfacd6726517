"""`helm uninstall`'s pre-delete hook: refuses while Ringfeed objects remain. Their finalizers need the operator (and
a Ring's, cass-operator): uninstalled first, the chart would leave them, and their namespaces, unable to go. Objects
already being deleted do not count. Exits 1 listing what remains, in the order to delete it."""

import sys

from kubernetes import client, config

GROUP, VERSION = "ringfeed.io", "v1alpha1"
ORDER = ("trainingjobs", "splits", "datasets", "rings")  # docs/install.md#uninstall


def remaining(custom: client.CustomObjectsApi) -> list[str]:
    found = []
    for plural in ORDER:
        for item in custom.list_cluster_custom_object(GROUP, VERSION, plural)["items"]:
            metadata = item["metadata"]
            if not metadata.get("deletionTimestamp"):
                found.append(f"{plural} {metadata['namespace']}/{metadata['name']}")
    return found


def main() -> int:
    config.load_incluster_config()
    found = remaining(client.CustomObjectsApi())
    if not found:
        print("no Ringfeed object remains: uninstalling")
        return 0
    print(f"{len(found)} Ringfeed objects remain; delete them first, in this order (docs/install.md#uninstall), "
          "or uninstall with --no-hooks to leave them:")
    for line in found:
        print(f"  {line}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
