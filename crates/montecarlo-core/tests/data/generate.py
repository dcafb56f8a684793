# Regenerates the fixtures in this folder: pip install gmsh==4.15.2 meshio==5.3.5
import gmsh
import meshio

gmsh.initialize()
gmsh.option.setNumber("General.Terminal", 0)
gmsh.model.add("two")
b1 = gmsh.model.occ.addBox(0, 0, 0, 10, 10, 4)
b2 = gmsh.model.occ.addBox(0, 0, 4, 10, 10, 6)
gmsh.model.occ.fragment([(3, b1)], [(3, b2)])
gmsh.model.occ.synchronize()
for i, (_, tag) in enumerate(gmsh.model.getEntities(3)):
    gmsh.model.addPhysicalGroup(3, [tag], 11 + i)
gmsh.model.addPhysicalGroup(2, [gmsh.model.getEntities(2)[0][1]], 99)
gmsh.option.setNumber("Mesh.MeshSizeMin", 4.0)
gmsh.option.setNumber("Mesh.MeshSizeMax", 5.0)
gmsh.model.mesh.generate(3)
for version, name in [(4.1, "41"), (2.2, "22")]:
    for binary in (0, 1):
        gmsh.option.setNumber("Mesh.MshFileVersion", version)
        gmsh.option.setNumber("Mesh.Binary", binary)
        gmsh.write(f"gmsh_{name}_{'bin' if binary else 'ascii'}.msh")
gmsh.finalize()

m = meshio.read("gmsh_41_ascii.msh")
tets = meshio.Mesh(
    m.points,
    [("tetra", m.get_cells_type("tetra"))],
    cell_data={"gmsh:physical": [m.get_cell_data("gmsh:physical", "tetra")]},
)
meshio.write("meshio.vtu", tets)
meshio.write("meshio_binary.vtk", tets, binary=True)
meshio.write("meshio_ascii.vtk", tets, binary=False)
