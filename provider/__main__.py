"""The wg-mesh plugin: serves the Mesh component to programs in other languages (wg_mesh.provider)."""

from wg_mesh.provider import main

if __name__ == "__main__":
    main()
