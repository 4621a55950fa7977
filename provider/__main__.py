"""The wg-mesh plugin: serves the Mesh component to programs in other languages (mesh.provider)."""

from mesh.provider import main

if __name__ == "__main__":
    main()
